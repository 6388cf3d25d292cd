"""The service as an OAuth 2.1 resource server: access tokens from the configured issuers checked at the edge.

issuer_keys.py  one issuer's discovered metadata and signing keys, cached, refreshed on an unknown key id
tokens.py       an access token (a JWT, or an opaque one by introspection) -> the caller it names
resource.py     Protected Resource Metadata (RFC 9728) and the `WWW-Authenticate` challenges that point to it
"""

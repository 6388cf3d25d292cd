"""Tenants' credentials for backends: the typed record (record.py) and how it is sealed at rest (sealing.py)."""

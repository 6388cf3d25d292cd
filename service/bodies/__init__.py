"""Reading request bodies: JSON parsed strictly (what Python's `json` would take and this service refuses is a 422
saying why, never quoting the body), a batch's JSON Lines read as they stream, and large bodies parsed and
validated off the event loop. The rest of the service enters here:

    StrictJSONRoute      a route class: 415 for a body not sent as JSON, 422 for JSON the parser refuses
    JSONLinesRoute       the same, and JSON Lines for an endpoint marked `accepts_json_lines`
    loads, MalformedJSON the strict parser, and why it refused a body
    off_loop_if_large    a parse in a worker thread for a large body
    json_off_loop, drain a long answer written, and a large model freed, in worker threads
    takes_query_prefix   marks an endpoint that reads query parameters by a prefix (`metadata.<key>`)

Inside: strict_route.py and json_lines.py (the routes), strict_json.py (the parser), json_pieces.py (orjson, a piece
at a time, where it reads a body as the parser does) and off_loop.py (large bodies off the event loop).
"""

from service.bodies.json_lines import JSONLinesRoute, accepts_json_lines
from service.bodies.off_loop import drain, json_off_loop, off_loop_if_large
from service.bodies.strict_json import MalformedJSON, loads
from service.bodies.strict_route import StrictJSONRoute, takes_query_prefix

__all__ = [
    "JSONLinesRoute",
    "MalformedJSON",
    "StrictJSONRoute",
    "accepts_json_lines",
    "drain",
    "json_off_loop",
    "loads",
    "off_loop_if_large",
    "takes_query_prefix",
]

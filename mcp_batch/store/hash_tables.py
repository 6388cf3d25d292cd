"""Making a hash that is written by the dozen a hash table from its first write.

Redis keeps a hash of small entries (up to hash-max-listpack-entries, 512 by default, each at most
hash-max-listpack-value bytes, 64) as one list, a listpack, that every HSET, HGET and HDEL scans from its head. A hash
written many fields at a time pays that scan once per field: a submit's ids hash cost its calls n²/2 steps until it
passed 512 entries, and the in-flight hash, whose read-ahead claims come and go by the dozen, was the largest cost per
item of the finish-and-claim script. A field longer than hash-max-listpack-value makes a hash a table for good (Redis
never turns one back while it runs), so the store sets `TABLE_FIELD` and deletes it in the same atomic step, or before
anything reads the hash: nobody sees it. A server configured with a larger hash-max-listpack-value keeps listpacks,
which only costs time.
"""

from __future__ import annotations

# Never an item's index (digits) nor a call's id (one with a dot is refused).
TABLE_FIELD = "." * 65
TABLE_OVER = 64  # a hash first written with more fields than this is made a table

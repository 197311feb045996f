"""A student's limits, in one package.

- `resolution.py`: which limits apply to a request (key → student → class → site defaults),
  pure.
- `gate.py`: applying them to one request before it is dispatched: the atomic check-and-charge
  in live state, the 429 in the client's envelope, the ticket that settles the reservation.
- `quota.py`: the counters' arithmetic (the request window, the day's, week's and term's
  tokens, concurrency), pure, and its Lua script;
- `live_quota.py`: the same rule in the live state, on both back ends (a Lua script in Redis,
  in process on the embedded default), plugged into core/live.py's mechanism.
- Teachers change limits through `accounts/services.py` (`limits_set`); the key cache
  (`accounts/key_cache.py`) carries each key's resolved policy to the gateway.
"""

"""Where a worker slot is chosen, waited for and claimed: one package, like llama-swap's scheduler.

- `line.py`: the request's way in: the fair line a request waits in, its pump, the choice of a
  worker (fleet/scheduler.py ranks them) and the claim of one of its slots;
- `rules.py`: the line's pure rules (the cost estimate, the light lane, when to give up);
- `fair_share.py`: the fair ordering of the waiting students and its Lua halves;
- `slot_owners.py`: which slot a request takes, whose cache it holds, the handover's steps;
- `slot_files.py`, `shared_prefix.py`: saving and restoring a slot's prompt cache, and the one
  prefix many students may share;
- `live.py`: these rules' halves in the live state (both back ends), plugged into core/live.py's
  mechanism (leases, suspects, generations, one batch per request's end).
"""

"""`manage.py bench_gateway`: what the gateway costs, measured against the same upstream reached
directly. Pure parts (the replay upstream, the load generator, the report) import no Django;
run.py starts the processes."""

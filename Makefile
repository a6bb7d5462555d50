# The reliability harness (docs/reliability.md): crash safety, concurrency, soak, fuzz,
# isolation. Needs PostgreSQL on 127.0.0.1:5432 (db test) and redis-server installed;
# what is missing is skipped with the reason.
PYTHON ?= python

.PHONY: reliability reliability-quick

reliability:  ## the full run: 60 SIGKILLs per backend, 16 writers, a 600 s soak
	$(PYTHON) -m reliability

reliability-quick:  ## the short version CI runs
	$(PYTHON) -m reliability --quick

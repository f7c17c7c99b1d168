"""Cluster lifecycle: the state store, the auth token, hardening, `ray up`/`ray down`, access."""

"""Pure renderers: a validated spec in, a Ray artifact (plain data) out. No I/O here."""

"""A cluster's lifecycle: plan (pure) what `up` must do, apply it through the cluster's launch
backend (orchestrator.launch: Ray's `ray up`/`ray down`), ask the dashboard how it is
(`health`), and hands on its head (`remote`)."""

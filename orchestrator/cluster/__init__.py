"""A cluster's lifecycle: plan (pure) what `up` must do, apply it through a ClusterBackend
(`launcher.RayLauncher`: Ray's `ray up`/`ray down`), and ask the dashboard how it is (`health`)."""

"""The `run` use case (`experiment`: prepare, target, submit once, follow, collect results), and
what it needs: the run's share of Ray (`needs`), what it shows while following (`progress`,
`phases`), its secrets (`secrets`), MLflow checked first (`tracking`), and a run on a cluster of
its own, a RayJob (`rayjob`, with its code in a package store: `package_store`)."""

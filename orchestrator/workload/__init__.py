"""The code that runs *on the cluster*, as the job's entrypoint (`python -m orchestrator.workload`).

The resolved configuration arrives as JSON in the environment (`orchestrator.contract`); its
`workload` says what to run. Training (`train/`: TorchTrainer, XGBoostTrainer, Tune) is the
first; batch prediction and serving will sit beside it and share `data`, `models` and `results`.
This package imports only `contract` and `util` from the rest of orchestrate: it ships to the
cluster with the job.
"""

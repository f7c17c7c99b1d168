"""The code that runs *on the cluster*, as the job's entrypoint (`python -m orchestrator.workload`).

The resolved configuration arrives as JSON in the environment (`orchestrator.contract`); its
`workload` says what to run: training (`train/`: one run or a Tune sweep of a trainer from
`trainers/`: TorchTrainer, XGBoostTrainer, LightGBMTrainer) or batch prediction (`predict`);
serving (`serving`) loads the same checkpoints through the same trainers (`inference`).
This package imports only `contract` and `util` from the rest of orchestrate: it ships to the
cluster with the job.
"""

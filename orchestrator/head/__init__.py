"""What runs on a cluster's head outside any job: copied there by `ray up` (a file mount of this
folder on `~/.orchestrate/head`) and run with the head's own Python. It may use only the standard
library and what a Ray head has (ray, and boto3 on AWS heads), imported inside functions; never
the rest of orchestrate, which is not installed there (`tests/test_layers.py` checks that)."""

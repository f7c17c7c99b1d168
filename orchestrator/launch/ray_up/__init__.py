"""The `ray-up` launch backend: Ray's cluster launcher over SSH (`backend.RayUp`), for the
providers of Ray's launcher (AWS, GCP, Azure, on-prem)."""

"""A trained model put to use: `predict` (a batch job over data), `serve` (Ray Serve
applications) and `demo` (a served model's demo page in a browser)."""

"""The client side of Ray's APIs on an Endpoint (reach.endpoint): the Job API (`jobs`), Serve's
REST API (`serve`), and a job client on whatever a command targets (`targets`)."""

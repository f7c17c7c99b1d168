"""Getting experiments onto Ray: where a job goes (`targets`), the job client on an Endpoint
(`client`), and the `run` use case (`experiment`: submit once, follow, collect results)."""

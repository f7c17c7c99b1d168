"""How a command reaches a Ray: `endpoint` (address, token, SSH forward), `embedded` (the embedded
Ray on this machine, for runs without a cluster) and `signin` (a browser signed in to a dashboard)."""

"""Looking into a running Ray from here: its dashboard in a signed-in browser (`dashboard`) and
its Train workers' profiles (`profile`)."""

"""Getting experiments onto Ray: the embedded local Ray, submission, following, results."""

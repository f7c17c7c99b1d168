"""What runs left: the `runs` table (job records joined with run summaries: `runs`) and
`results RUN RUN...` side by side (`compare`)."""

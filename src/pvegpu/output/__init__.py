"""What a run prints and writes for the user: the verification report and the end-of-run summary."""

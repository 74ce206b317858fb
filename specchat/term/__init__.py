"""What reaches a terminal: stdout, progress lines and summaries."""

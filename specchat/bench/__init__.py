"""`specchat bench`: prompts (prompts.py), running every mode fairly (runner.py), sums and
tables (report.py). The command itself is specchat/commands/bench.py."""

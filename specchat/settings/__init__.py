"""Every option declared once, and what is built from it: flags, the config file, load settings."""

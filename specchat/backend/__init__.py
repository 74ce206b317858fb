"""What answers: the Backend contract, local models (Runtime) and a remote server."""

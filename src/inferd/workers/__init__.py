"""Where runtimes run: in the main process or in a pool of worker processes."""

"""Small helpers with no knowledge of checkpoints: thread pools, times and sizes for people."""

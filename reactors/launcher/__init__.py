"""The launcher: claims runs from the queue, carries each out in a runtime, records the outcome."""

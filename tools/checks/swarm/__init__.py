"""A two-node Docker Swarm on one machine, for the swarm runtime's tests and benchmark."""

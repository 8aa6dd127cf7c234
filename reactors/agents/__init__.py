"""What runs inside a container: the agent SDK and the agents props ships (critics)."""

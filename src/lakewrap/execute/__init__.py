"""Running compiled plans against real lakes: connections, the transaction protocol, state."""

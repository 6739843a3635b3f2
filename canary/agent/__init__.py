"""``canary agent``: one per node. Publishes the node's device snapshots into the shared store on a
heartbeat, runs the probes queued for its own devices, and notices driver changes."""

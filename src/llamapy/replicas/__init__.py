"""Replicas on Ray Serve (`llamapy serve --replicas N`): one OpenAI endpoint over several
llamapy servers, routed by prompt prefix (affinity.py, router.py), autoscaled by Ray Serve,
retried on a lost replica (deployments.py); app.py builds and runs the application."""

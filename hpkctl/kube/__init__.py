"""The only package that imports the ``kubernetes`` client (an import-linter contract holds it).

Empty until the kubelet issue: the kubelet daemon will talk to the API server only through an
adapter here, sending plain dict bodies (the client's models are strict pydantic classes since 37.0).
"""

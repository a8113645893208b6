"""The kube-controller-manager stand-in's controllers (see ../README.md): the pod side of the Job,
ReplicaSet/Deployment and StatefulSet controllers, the garbage collector's owner check and pod GC,
as the real ones behave towards a kubelet. ``loop.run`` is the entry point."""

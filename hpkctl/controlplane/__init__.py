"""The control plane (etcd, kube-apiserver, controller-manager, CoreDNS, our scheduler and
admission hook) as an Apptainer image started as a Slurm job. Not built yet: see the issues."""

"""The `kuberay` launch backend: a RayCluster through the Kubernetes API (`backend.KubeRay`),
its manifests (`manifests`), and what KubeRay would refuse in them (`check`, `schema`, `crds/`)."""

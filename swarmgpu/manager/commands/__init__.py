"""What the operator's commands compute, pure over a snapshot or a stack file.

``audit``       `swarmgpu audit`: what is wrong with GPU labels and constraints; its
                ``Finding`` is what every check returns; the services' findings
``auditnodes``  what audit finds wrong with each node (labels, agent, ledger, GPU health),
                and ``Finding``
``plan``        `swarmgpu plan`: what placement would do for each service, as text
``movenames``   how `plan` and `status` name a move's nodes: cut hostnames, short IDs
``render``      `swarmgpu render`: a stack file with GPU placement resolved
``swarmspec``   a stack's services as `docker stack deploy` hands them to Swarm: each
                key's shape, the service spec the scheduler reads; ``StackError``
``nanocpus``    ``cpus`` as docker reads it: Go's big.Rat text, times 1e9, whole
``compose_gpu`` Compose's own GPU reservations read as a swarmgpu request
``model_servers`` a model server's own GPU count (vLLM ``-tp``...) against the request
``cudavisible`` a service's own ``CUDA_VISIBLE_DEVICES`` against the GPUs it is granted
``devshm``      a multi-GPU model server's ``/dev/shm`` (NCCL's room) in its mounts
``auditservers`` those three rules as audit's findings, read from a running service's spec
``auditmemo``   those findings kept per service while the fields they read stay the same
``composefile`` the stack file render writes: format 3.8, checked against ``schema/``
``restartkey``  a service's ``restart`` as docker applies it: a value it fails on
``interpolation`` ``${VAR}`` in a stack file, substituted as `docker stack deploy` does
``dotenv``      a compose ``.env`` beside the stack, which `docker stack deploy` never reads
``stackmerge``  several stack files (``render -c A -c B``) merged as `docker stack deploy`
                merges them
``envfile``     the env lines render adds to a service, less those its env_file sets
``stackpaths``  relative paths in a stack made absolute, as docker reads them from a file
``schema/``     docker/cli's compose schema, vendored with its licence
"""

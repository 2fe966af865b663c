"""Helpers shared by the test modules; test modules import from here, never from
each other (tests/test_test_layout.py checks it).

Harness and stand-ins (also run as scripts or by benchmarks/ and scripts/demo.py):
- swarm_harness: the real multi-node test swarm (dockerds in network namespaces).
- gpu_nodes: the GPU machines the swarm's workers stand in for, agents, the daemon,
  configs and the CLI as the tests start them.
- paths: where fixtures, captures and traces lie.
- fake_pynvml/, fake_nvml_agent: the fake NVML library built from real captures.
- hostile_agent, faultproxy, slowflood, httpprobe: hostile peers, a faulty engine
  proxy, slow-connection floods, a probe run inside a namespace.
- engine_stub: a recording stand-in for the engine's socket, for the docker-proxy's
  tests and benchmarks/bench_proxy_memory.py.
- proxy_write: a write through the docker-proxy to engine_stub, its answer and what
  the engine saw.
- loop_engine: an engine on loopback (HTTP, keep-alive, long answers chunked) for
  docker-py's own client: test_engine_answer_bound, benchmarks/bench_answer_bound.py.
- docker_clis: every docker CLI on the machine, and the service spec each deploys from
  a stack to a stand-in engine (the oracle of test_yaml_as_docker_reads).
- docker_config: what `docker stack config` and render each read of stack files, in one
  shape, and docker's readings recorded in tests/fixtures/docker-stack-config/ (the
  oracle of test_render_as_docker_config).
- serving: a stand-in server served in a thread for a block (loop_engine's, docker_clis',
  plain_agent's: an agent without token or TLS, for the Host tests).
- task_watch: records the tasks a service ran; web_fleet: a fleet document made by the
  real planner; browser: a headless chromium for the GPU map.
- shared_ask: parallel writes sharing one ask (the leader's term, the engine's node
  listing): a clock that counts their reads, the writes run at once.
- agent_threads: the agent facts-refresh threads a module leaves running (checked
  after each module by tests/conftest.py).
- daemon: the `daemon` fixture's setup (tests/conftest.py); empty_swarm: a swarm with
  nothing in it, for the daemon's own life without one; once_slow_agents: `swarmgpu run
  --once` over GPU nodes whose agents never answer, for its signals.

Builders of test inputs, one module per subject: placement, forged (a recording swarm
and forged Swarm objects), health, rebalance, rebalance_fragmentation, identity,
webauth, overshare, dashboard, deploy_docs, sim, memo, planner, render_compose,
render_engines, prometheus, write_paths, fifo (a FIFO where a file belongs, read without
hanging the test; a doctor's file swapped for one after its stat), loglines (the log
lines a fixture keeps), counted (a method's calls
counted), traced (the most memory a call holds, traced), fake_proc (a fake ``/proc``:
a PID's cgroup and start time, the uptime, its ``self`` links), scheduler
(Swarm's scheduler rule on a waiting task of an older service revision, for the
in-memory swarms), commands (`plan`/`status` in-process over a recording swarm or an
empty cluster),
config_check (`config check` on a config written to tmp_path, with --env-file or not),
isolation (two RTX 4090 nodes and the failing a-bad of the placement isolation tests),
preempt_stop (victims stopped as the actuator stops them), move_then_preempt (a cycle's
rebalance then preemption steps on one snapshot), crowded_node (one GPU node crowded
with small victims, a topology preemptor's choice there), reference_victims (the victims
as every set tried one by one chose them, before ``victimsearch``), unread (specs and task
answers not as Docker sends them, a client its engine lists them to), pending_high (a
preemptor pending on a full RTX 4090 node; a fresh Preempter's decision there with a
record of the victim's stop), swarm_cache (a SwarmCache over a stand-in API,
and a stand-in for the cache's own reads, counted),
defrag_cluster (four half-held RTX 4090 nodes and a free DGX, for defrag's search),
drawn_plans (rebalance inputs drawn by seed: a plan on the kept allocator against one
built per check), denied (a CDI spec dir the doctor may not list, as a user or as root),
write_time (label sync's write-time task check over a task the snapshot lacks),
answered_engine (docker-py's own client, its engine's HTTP answered by path),
stepped_daemon (a daemon with its real steps, cycled by the test), yaml_parser (libyaml's
parser or PyYAML's), ungated (services deployed without render, planned under a tenants
config);
and
for the real swarm:
swarm_services (deploy a stack, wait for it), swarm_rebalance, swarm_fragmentation,
health_swarm, webauth_swarm, stranded_swarm (a waiting task Swarm's scheduler no longer
tries), overshare_swarm (a fake NVML agent whose processes a test names, for the
over-share restart).
"""

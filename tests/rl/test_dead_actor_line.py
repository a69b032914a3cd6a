"""``afm.rl.cluster.dead_actor_line``: one line for the process whose death stopped a multi-node verl run, from the
run's log, whichever error reached the driver first. The real kill: tests/rl/test_two_nodes.py."""

from __future__ import annotations

from afm.rl.cluster import dead_actor_line

DRIVER = ('Traceback (most recent call last):\n'
          '  File "/x/verl/trainer/ppo/v1/trainer_base.py", line 586, in _step_once\n'
          '  File "/x/verl/trainer/ppo/v1/trainer_base.py", line 1658, in _compute_old_log_prob\n'
          '  File "/x/verl/single_controller/ray/base.py", line 56, in __call__\n')

ACTOR_DIED = ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
              "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
              "\tactor_id: 1f2e\n\tpid: 4242\n\tname: abcWorkerDict_1:0\n\tnamespace: n\n\tip: 192.0.2.2\n"
              "The actor is dead because its worker process has died.\n")

# the surviving rank's broken collective reached the driver first; the raylet reported the dead worker before it
RAYLET = ("(WorkerDict pid=4242) [rank1]:W1201 03:21:15 4242 torch/fx/_symbolic_trace.py:56] is_fx_tracing\n"
          "(WorkerDict pid=5151) [rank0]:W1201 03:21:15 5151 torch/fx/_symbolic_trace.py:56] is_fx_tracing\n"
          "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
          "troubleshoot the problem, check the logs for the dead worker. Lease ID: 0f00 Worker ID: 59a9 Node ID: "
          "fefe14bb7c31aab7 Worker IP address: 192.0.2.2 Worker port: 14885 Worker PID: 4242 Worker exit type: "
          "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2.\n")


def test_the_actor_ray_says_died_is_named_with_its_rank():
    log = DRIVER + ACTOR_DIED + "Node ID: ab12cd34ef56aa Worker IP address: 192.0.2.2 Worker port: 1 Worker PID: 4242\n"
    line = dead_actor_line(log, gpus=1)
    assert line is not None and line.startswith("trainer rank 1 (verl's WorkerDict abcWorkerDict_1:0) on Ray node "
                                                "ab12cd34ef56 (192.0.2.2) died while verl ran _compute_old_log_prob")
    assert "its process (pid 4242) died" in line and line.endswith("the run stopped")


def test_a_broken_collective_first_still_names_the_dead_rank_from_the_raylet_report():
    log = RAYLET + DRIVER + ("RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:54450: "
                             "Connection reset by peer.\n")
    line = dead_actor_line(log, gpus=1)
    assert line == ("trainer rank 1 (verl's WorkerDict, pid 4242) on Ray node fefe14bb7c31 (192.0.2.2) died while "
                    "verl ran _compute_old_log_prob (verl/trainer/ppo/v1/trainer_base.py): its process (pid 4242) "
                    "died: out of memory (dmesg on that node), killed (the scheduler?) or crashed (that node's Ray "
                    "logs, session_latest/logs/*4242*); the other ranks lost their peer; the run stopped")


def test_a_run_where_nothing_died_has_no_line():
    assert dead_actor_line(DRIVER + "ValueError: a bad config\n", gpus=1) is None

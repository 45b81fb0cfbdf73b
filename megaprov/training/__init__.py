"""The training side: job spec, planner, Megatron-LM launch rendering, jobs, follower, verdict, data, lab trainer."""

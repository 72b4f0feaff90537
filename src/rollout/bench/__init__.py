"""`inv bench --only floor`: rollout measured against a floor script, side by side on lab hosts.

figures: medians, ratios, targets and the table (pure); floor: the floor script run over
scp and ssh; child: a rollout run as a child process, timed with its CPU and peak RSS;
side_by_side: the lab runs that alternate the two."""

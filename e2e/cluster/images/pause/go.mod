module bettercompute.local/e2e/cluster/images/pause

go 1.22

"""What-if quota planning: replay the cluster's real job history with one setting changed."""

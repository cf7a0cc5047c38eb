"""Runtime side: protocol, client library for training scripts, controller, launcher, job."""

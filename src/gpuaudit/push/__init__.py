"""`gpuaudit push`: ship finished files to a directory or S3 target (docs/collection.md)."""

from gpuaudit.push.run import (
           STATE_DIR,
           DirTarget,
           PushBusy,
           PushStats,
           S3Target,
           Target,
           follow,
           make_target,
           push,
           state_dir,
)

__all__ = ["STATE_DIR", "DirTarget", "PushBusy", "PushStats", "S3Target", "Target", "follow", "make_target", "push",
           "state_dir"]

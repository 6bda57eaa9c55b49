"""Mutants of the DINO example: ``examples/train_dino.py`` (DINO's loss, centre, EMA teacher,
multi-crop wrapper and step). Tests: ``tests/integrations/test_dino_example.py``."""

ROW_LOSS = (
    "Examples: train_dino.py computes DINO's loss (teacher's centred, sharpened softmax on each global view against "
    "the student's on every other view)"
)
ROW_TEACHER = "Examples: train_dino.py's teacher sees the global views only and is the student's EMA, never trained"
ROW_VIEWS = "Examples: train_dino.py's networks see every view in the order the loader gives"

T = "tests/integrations/test_dino_example.py::"
LOSS = T + "test_dino_loss_matches_the_written_out_reference"
EMA = T + "test_teacher_and_centre_are_exponential_moving_averages"
STEP = T + "test_a_step_feeds_the_teacher_global_views_only_and_updates_teacher_and_centre"
WRAP = T + "test_multicrop_wrapper_equals_one_view_at_a_time"

F = "examples/train_dino.py"

MUTANTS = [
    {
        "id": "dino-loss-pairs-a-crop-with-itself",
        "row": ROW_LOSS,
        "file": F,
        "old": "            if v == i:  # the same crop: no loss\n                continue\n",
        "new": "",
        "tests": [LOSS],
    },
    {
        "id": "dino-loss-teacher-not-centred",
        "row": ROW_LOSS,
        "file": F,
        "old": "F.softmax((teacher_out - center) / teacher_temp, dim=-1)",
        "new": "F.softmax(teacher_out / teacher_temp, dim=-1)",
        "tests": [LOSS],
    },
    {
        "id": "dino-loss-student-not-tempered",
        "row": ROW_LOSS,
        "file": F,
        "old": "student = (student_out / student_temp).chunk(num_views)",
        "new": "student = student_out.chunk(num_views)",
        "tests": [LOSS],
    },
    {
        "id": "dino-loss-sums-instead-of-averaging-the-batch",
        "row": ROW_LOSS,
        "file": F,
        "old": "torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).mean()",
        "new": "torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).sum()",
        "tests": [LOSS],
    },
    {
        "id": "dino-ema-momentum-swapped",  # the teacher jumps to the student each step
        "row": ROW_TEACHER,
        "file": F,
        "old": "pt.mul_(momentum).add_(ps.detach(), alpha=1 - momentum)",
        "new": "pt.mul_(1 - momentum).add_(ps.detach(), alpha=momentum)",
        "tests": [EMA, STEP],
    },
    {
        "id": "dino-centre-momentum-swapped",
        "row": ROW_TEACHER,
        "file": F,
        "old": "center.mul_(momentum).add_(teacher_out.mean(dim=0, keepdim=True), alpha=1 - momentum)",
        "new": "center.mul_(1 - momentum).add_(teacher_out.mean(dim=0, keepdim=True), alpha=momentum)",
        "tests": [EMA, STEP],
    },
    {
        "id": "dino-teacher-sees-the-local-views",
        "row": ROW_TEACHER,
        "file": F,
        "old": "        teacher_out = teacher(views[:NUM_GLOBAL])",
        "new": "        teacher_out = teacher(views)",
        "tests": [STEP],
    },
    {
        "id": "dino-ema-before-the-optimizer-step",  # the teacher averages the student of the previous step
        "row": ROW_TEACHER,
        "file": F,
        "old": "    opt.step()\n    update_teacher(student, teacher, momentum)\n",
        "new": "    update_teacher(student, teacher, momentum)\n    opt.step()\n",
        "tests": [STEP],
    },
    {
        "id": "dino-multicrop-groups-in-reverse-order",
        "row": ROW_VIEWS,
        "file": F,
        "old": "        return self.head(torch.cat(feats))",
        "new": "        return self.head(torch.cat(feats[::-1]))",
        "tests": [WRAP],
    },
]

"""runtime/kernel_cache.py: Triton's cache goes into the plan directory unless the user chose one
or the plan directory cannot take it (then Triton's default, untouched)."""

from deepinfer.runtime.kernel_cache import ENV, use_plan_kernel_cache


def test_unset_points_triton_at_the_plan(tmp_path):
    environ: dict[str, str] = {}
    cache_dir, why = use_plan_kernel_cache(tmp_path, environ)
    assert environ[ENV] == cache_dir == str((tmp_path / "kernel-cache").resolve())
    assert (tmp_path / "kernel-cache").is_dir() and "plan" in why
    assert use_plan_kernel_cache(tmp_path, environ)[0] == cache_dir  # idempotent


def test_a_user_choice_is_kept(tmp_path):
    environ = {ENV: "/somewhere/else"}
    assert use_plan_kernel_cache(tmp_path, environ) == ("/somewhere/else", f"{ENV} set by the user")
    assert environ == {ENV: "/somewhere/else"} and not (tmp_path / "kernel-cache").exists()


def test_a_plan_dir_that_cannot_take_it_leaves_the_default(tmp_path):
    not_a_dir = tmp_path / "plan"
    not_a_dir.write_text("a file where the plan directory should be")
    environ: dict[str, str] = {}
    cache_dir, why = use_plan_kernel_cache(not_a_dir, environ)
    assert cache_dir == "" and ENV not in environ and "not writable" in why

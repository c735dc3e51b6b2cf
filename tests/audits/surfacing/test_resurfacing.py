"""Thresholds apply to stored audits: a saved threshold re-surfaces them from their stored
scores (a background task), with the same rule the analysis uses."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.test import Client

from analyzers.config_store import load_config, save_config
from analyzers.engine.config import AuditorConfig
from analyzers.engine.surfacing import Thresholds, decide_surfaced
from analyzers.models import AnalyzerConfig, GlobalSettings
from audits.execution import execute
from audits.intake import submit
from audits.models import AnalyzerRunRecord, AuditRun, ResurfaceJob
from audits.surfacing import jobs, policies
from tests.factories import make_audit, make_audits, result

INPUTS = [
    ("Any results from Decathlon?", "Namedrop: Decathlon. Decathlon grew conversion by 50%."),
    ("Is Acme better?", "Everyone agrees Acme is the best search engine, obviously."),
    ("Where are the docs?", "Read [this article](https://random-blog.example.org/tips) first."),
    ("Say nothing", ""),
    ("How do I set up faceting?", "Acme is easy to set up."),
]


def save_threshold(value: float, analyzer: str = "") -> None:
    config = load_config()
    if analyzer:
        analyzers = dict(config.analyzers)
        analyzers[analyzer] = {**analyzers.get(analyzer, {}), "threshold": value}
        config = config.model_copy(update={"analyzers": analyzers})
    else:
        config = config.model_copy(update={"threshold": value})
    save_config(config, actor="test", source="test")


def expected_flags(run: AuditRun) -> dict[int, bool]:
    """What the rule says for each stored result at the current thresholds."""
    thresholds = policies.current_thresholds().with_options(run.options)
    return {
        r.pk: decide_surfaced(
            status=r.status,
            score=r.score,
            should_surface=r.should_surface,
            threshold=thresholds.for_analyzer(r.analyzer_id),
        )
        for r in run.results.all()
    }


def assert_follow_current() -> None:
    policy = policies.current_policy()
    for run in AuditRun.objects.filter(status="complete"):
        flags = expected_flags(run)
        stored = dict(run.results.values_list("pk", "surfaced"))
        assert stored == flags, run.pk
        assert run.has_card == any(flags.values()), run.pk
        assert run.surfacing_policy_id == policy.pk, run.pk


# --- the one rule ----------------------------------------------------------------------------


def test_thresholds_agree_with_the_engine_configuration_for_random_configs():
    rng = random.Random(7)
    ids = ["redflag", "links", "grounding", "bias", "tone", "judge"]
    for _ in range(300):
        analyzers = {
            a: ({"threshold": round(rng.random(), 2)} if rng.random() < 0.4 else {"enabled": True})
            for a in rng.sample(ids, rng.randint(0, len(ids)))
        }
        config = AuditorConfig(threshold=round(rng.random(), 2), analyzers=analyzers)
        options = {a: {"threshold": round(rng.random(), 2)} for a in ids if rng.random() < 0.2}
        thresholds = Thresholds.from_config(config).with_options(options)
        for a in ids:
            assert thresholds.for_analyzer(a) == config.with_options(options).threshold_for(a)


def test_failed_runs_never_surface_and_forced_ones_always_do():
    assert not decide_surfaced(status="failed", score=0.0, should_surface=False, threshold=0.0)
    assert not decide_surfaced(status="timeout", score=0.0, should_surface=True, threshold=0.0)
    assert decide_surfaced(status="ok", score=0.0, should_surface=True, threshold=1.0)
    assert decide_surfaced(status="ok", score=0.5, should_surface=False, threshold=0.5)
    assert not decide_surfaced(status="ok", score=0.49, should_surface=False, threshold=0.5)


def test_equal_thresholds_have_equal_keys_and_different_ones_do_not():
    a = Thresholds(0.3, {"bias": 0.5, "tone": 0.2})
    b = Thresholds.from_dict({"threshold": 0.3, "analyzers": {"tone": 0.2, "bias": 0.5}})
    assert a.key() == b.key()
    assert a.key() != Thresholds(0.3, {"bias": 0.51, "tone": 0.2}).key()


@pytest.mark.django_db(transaction=True)
def test_resurfaced_audits_equal_audits_analysed_at_the_new_thresholds():
    """Analysed at 0.3 then re-surfaced at 0.6 (global) and 0.1 (tone) == analysed there."""
    for user_input, response in INPUTS:
        execute.execute_run(
            submit.submit_audit(
                user_input=user_input,
                response=response,
                collision_key=f"a-{user_input}",
                enqueue=False,
            ).pk
        )
    before = dict(AnalyzerRunRecord.objects.values_list("pk", "surfaced"))
    save_threshold(0.6)
    save_threshold(0.1, analyzer="tone")
    assert ResurfaceJob.objects.first().status == "done"
    resurfaced = {
        run.user_input: (run.has_card, dict(run.results.values_list("analyzer_id", "surfaced")))
        for run in AuditRun.objects.all()
    }
    fresh = {}
    for user_input, response in INPUTS:
        run = submit.submit_audit(
            user_input=user_input, response=response, collision_key=f"b-{user_input}", enqueue=False
        )
        execute.execute_run(run.pk)
        run.refresh_from_db()
        fresh[user_input] = (run.has_card, dict(run.results.values_list("analyzer_id", "surfaced")))
    assert resurfaced == fresh
    after = dict(AnalyzerRunRecord.objects.filter(pk__in=before).values_list("pk", "surfaced"))
    assert after != before  # the change was visible: some results surface no more
    assert_follow_current()


# --- saving a threshold re-surfaces the stored audits ---------------------------------------


@pytest.mark.django_db(transaction=True)
def test_saving_the_global_threshold_changes_the_api_surfaced_list(read_key):
    from tests.conftest import ApiClient

    make_audits(60, seed=3)
    api = ApiClient(read_key)

    def surfaced_count() -> int:
        body = api.get("/api/audits", {"surfaced": "true", "limit": 100}).json()
        return len(body["items"])

    save_threshold(0.3)  # the demo data was surfaced at 0.3; records the policy
    at_03 = surfaced_count()
    save_threshold(0.9)
    at_09 = surfaced_count()
    assert at_09 < at_03
    assert (
        at_09
        == AuditRun.objects.filter(results__status="ok", results__score__gte=0.9).distinct().count()
    )
    assert_follow_current()
    save_threshold(0.3)
    assert surfaced_count() == at_03


@pytest.mark.django_db(transaction=True)
def test_an_analyzers_own_threshold_re_surfaces_only_its_results():
    run = make_audit(results=[result("bias", 0.4), result("tone", 0.4)])
    assert set(run.results.filter(surfaced=True).values_list("analyzer_id", flat=True)) == {
        "bias",
        "tone",
    }
    save_threshold(0.5, analyzer="bias")
    assert set(run.results.filter(surfaced=True).values_list("analyzer_id", flat=True)) == {"tone"}
    run.refresh_from_db()
    assert run.has_card
    save_threshold(0.45)  # global: tone goes too
    run.refresh_from_db()
    assert not run.has_card
    AnalyzerConfig.objects.filter(analyzer_id="bias").delete()  # its own threshold gone
    assert ResurfaceJob.objects.first().policy.analyzer_thresholds == {}
    run.refresh_from_db()
    assert not run.has_card  # 0.4 < 0.45 for both


@pytest.mark.django_db(transaction=True)
def test_forced_failed_and_per_audit_option_thresholds_are_kept():
    forced = make_audit(results=[result("grounding", 0.1, should_surface=True)])
    failed = make_audit(results=[result("tone", 0.0, status="failed", error="boom")])
    own = make_audit(results=[result("bias", 0.35)], options={"bias": {"threshold": 0.2}})
    save_threshold(1.0)
    for run in (forced, failed, own):
        run.refresh_from_db()
    assert forced.has_card and forced.results.get().surfaced
    assert not failed.has_card
    assert own.has_card  # its own per-request threshold (0.2) still applies
    save_threshold(0.0)
    failed.refresh_from_db()
    assert not failed.has_card  # a failed run scores nothing, whatever the threshold


@pytest.mark.django_db(transaction=True)
def test_a_saved_setting_that_is_no_threshold_starts_no_job():
    make_audits(5)
    save_threshold(0.4)
    jobs = ResurfaceJob.objects.count()
    config = load_config()
    config.analyzers["redflag"] = {**config.analyzers.get("redflag", {}), "max_chars": 1234}
    save_config(config, actor="test", source="test")
    GlobalSettings.objects.update(max_concurrency=3)
    g = GlobalSettings.load()
    g.max_concurrency = 5
    g.save()
    assert ResurfaceJob.objects.count() == jobs


@pytest.mark.django_db(transaction=True)
def test_audits_stored_after_a_change_follow_the_new_thresholds():
    save_threshold(0.95)
    run = submit.submit_audit(user_input=INPUTS[0][0], response=INPUTS[0][1], enqueue=False)
    execute.execute_run(run.pk)
    run.refresh_from_db()
    assert run.threshold == 0.95
    assert run.surfacing_policy == policies.current_policy()
    assert_follow_current()


# --- a second change during a recompute --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_second_change_during_a_recompute_wins_and_loses_no_rows(monkeypatch):
    make_audits(40, seed=5)
    save_threshold(0.3)
    monkeypatch.setattr(jobs, "BATCH", 7)
    original = jobs._resurface_batch
    calls = {"n": 0}

    def batch_then_change(job, policy, thresholds, rows):
        calls["n"] += 1
        if calls["n"] == 2:
            save_threshold(0.8)  # runs the second job inline (ImmediateBackend), to the end
        return original(job, policy, thresholds, rows)

    monkeypatch.setattr(jobs, "_resurface_batch", batch_then_change)
    save_threshold(0.5)
    first, second = ResurfaceJob.objects.order_by("id")[1:3]
    assert first.status == "superseded"
    assert second.status == "done"
    assert load_config().threshold == 0.8
    assert_follow_current()


@pytest.mark.django_db(transaction=True)
def test_an_older_job_writes_nothing_once_a_newer_one_exists(monkeypatch):
    make_audits(12, seed=6)
    save_threshold(0.3)
    old_policy = policies.policy_for(Thresholds(0.7))
    job = ResurfaceJob.objects.create(policy=old_policy)
    original = jobs._stale_batch

    def read_then_newer(policy, after):
        rows = original(policy, after)
        ResurfaceJob.objects.create(policy=policies.current_policy())  # between read and write
        return rows

    monkeypatch.setattr(jobs, "_stale_batch", read_then_newer)
    assert jobs.run_job(job.pk) == "superseded"
    assert not AuditRun.objects.filter(surfacing_policy=old_policy).exists()
    job.refresh_from_db()
    assert job.processed == 0


@pytest.mark.django_db(transaction=True)
def test_two_quick_changes_on_the_thread_backend_end_at_the_latest(thread_tasks, monkeypatch):
    make_audits(150, seed=8)
    monkeypatch.setattr(jobs, "BATCH", 20)
    save_threshold(0.2)
    save_threshold(0.7)
    deadline = time.monotonic() + 30
    while ResurfaceJob.objects.filter(status__in=["pending", "running"]).exists():
        assert time.monotonic() < deadline, "re-surfacing did not finish"
        time.sleep(0.05)
    assert ResurfaceJob.objects.first().status == "done"
    assert_follow_current()
    assert policies.staleness(policies.current_policy()).count == 0


# --- what the pages say ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_tuning_page_says_which_audits_still_show_old_surfacing(staff_user, settings):
    from tests.conftest import _reset_task_backends

    runs = make_audits(8, seed=9)
    save_threshold(0.3)
    dummy = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    settings.TASKS = dummy
    _reset_task_backends(dummy)  # queued, not run: the job stays pending
    save_threshold(0.6)
    client = Client()
    client.force_login(staff_user)
    page = client.get("/tuning/").content.decode()
    oldest = min(r.created_at for r in runs)
    assert 'id="resurface-progress"' in page
    assert "8</strong> audits" in page
    assert oldest.strftime("%Y-%m-%d") in page
    assert 'hx-trigger="every 2s"' in page  # polls while the job is at work
    detail = client.get(f"/audits/{runs[0].pk}/").content.decode()
    assert "older thresholds" in detail

    job = ResurfaceJob.objects.first()
    assert jobs.run_job(job.pk) == "done"
    status = client.get("/tuning/resurfacing/").content.decode()
    assert 'id="resurface-done"' in status
    assert "every 2s" not in status
    detail = client.get(f"/audits/{runs[0].pk}/").content.decode()
    assert "older thresholds" not in detail
    assert "Threshold applied" in detail and "0.60" in detail


@pytest.mark.django_db(transaction=True)
def test_apply_now_re_surfaces_audits_from_before_policies(staff_user, plain_user):
    make_audits(6, seed=10)
    AuditRun.objects.update(surfacing_policy=None)  # as stored before this feature
    client = Client()
    client.force_login(staff_user)
    page = client.get("/tuning/").content.decode()
    assert 'id="resurface-now"' in page
    response = client.post("/tuning/resurfacing/")
    assert response.status_code == 200
    assert 'id="resurface-done"' in response.content.decode()
    assert_follow_current()
    outsider = Client()
    outsider.force_login(plain_user)
    assert outsider.post("/tuning/resurfacing/").status_code in (302, 403)


@pytest.mark.django_db(transaction=True)
def test_the_detail_page_shows_an_analyzers_own_threshold(staff_user):
    save_threshold(0.25, analyzer="tone")
    run = make_audit(results=[result("tone", 0.3), result("bias", 0.2)])
    jobs.schedule(force=True)
    client = Client()
    client.force_login(staff_user)
    html = client.get(f"/audits/{run.pk}/").content.decode()
    assert "tone 0.25" in html
    assert 'title="score (threshold 0.25)"' in html


@pytest.mark.django_db(transaction=True)
def test_trends_cards_follow_a_recompute(staff_user):
    from audits.dashboard.queries import trends

    make_audits(40, seed=11, spread=timedelta(days=5))
    save_threshold(0.3)
    cards_before = trends(7)["summary"]["cards"]  # cached per day
    save_threshold(0.95)
    cards_after = trends(7)["summary"]["cards"]
    assert cards_after == AuditRun.objects.filter(has_card=True).count()
    assert cards_after < cards_before


@pytest.mark.django_db(transaction=True)
def test_an_abandoned_job_is_queued_again_at_recovery(settings):
    from django.utils import timezone

    make_audits(5, seed=12)
    save_threshold(0.3)
    job = ResurfaceJob.objects.create(policy=policies.policy_for(Thresholds(0.9)))
    AuditRun.objects.update(surfacing_policy=None)
    ResurfaceJob.objects.filter(pk=job.pk).update(
        status="running", updated_at=timezone.now() - timedelta(minutes=10)
    )
    assert jobs.requeue_abandoned() == 1
    job.refresh_from_db()
    assert job.status == "done"
    assert not policies.stale_audits(job.policy).exists()


def test_bounded_batches():
    """Each write touches at most BATCH audits, in chunks the database accepts."""
    assert jobs.BATCH <= 5000
    assert list(jobs._chunks(list(range(2000)))) == [
        list(range(0, 900)),
        list(range(900, 1800)),
        list(range(1800, 2000)),
    ]


@pytest.mark.django_db(transaction=True)
def test_staleness_counts_every_audit_not_at_the_current_thresholds():
    runs = make_audits(12, seed=13)
    save_threshold(0.4)
    current = policies.current_policy()
    assert policies.staleness(current).count == 0
    older = policies.policy_for(Thresholds(0.1))
    newer = policies.policy_for(Thresholds(0.9))  # a higher id than the current one
    AuditRun.objects.filter(pk=runs[0].pk).update(surfacing_policy=None)
    AuditRun.objects.filter(pk=runs[1].pk).update(surfacing_policy=older)
    AuditRun.objects.filter(pk=runs[2].pk).update(surfacing_policy=newer)
    AuditRun.objects.filter(pk=runs[3].pk).update(surfacing_policy=None, status="failed")
    stale = policies.staleness(current)
    picked = [runs[0], runs[1], runs[2]]
    assert stale.count == 3 == policies.stale_audits(current).count()
    assert stale.oldest == min(r.created_at for r in picked)
    assert stale.newest == max(r.created_at for r in picked)
    assert policies.any_stale(current)

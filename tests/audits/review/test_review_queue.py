"""The review queue: claim order, claims under concurrent reviewers, verdicts, skip, access."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audits.models import AuditRun, Review
from audits.review import queue as review_queue
from audits.store.verdicts import record_review
from tests.factories import annotation, make_audit, result


def surfaced(score: float = 0.8, *, hours_ago: float = 1, **fields) -> AuditRun:
    return make_audit(
        results=[result("tone", score, [annotation("condescending", "warning", evidence="Acme")])],
        created_at=timezone.now() - timedelta(hours=hours_ago),
        **fields,
    )


@pytest.fixture
def reviewers(django_user_model):
    def make(name: str, *, perm: bool = True, staff: bool = True):
        user = django_user_model.objects.create_user(
            name, f"{name}@example.com", "pw-123456789", is_staff=staff
        )
        if perm:
            user.user_permissions.add(Permission.objects.get(codename="add_review"))
        return django_user_model.objects.get(pk=user.pk)  # fresh permission cache

    return make


@pytest.fixture
def alice(db, reviewers):
    return reviewers("alice")


@pytest.fixture
def bob(db, reviewers):
    return reviewers("bob")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the service -----------------------------------------------------------------------------


def test_queue_holds_only_complete_surfaced_unreviewed_audits(alice):
    wanted = surfaced()
    make_audit(results=[result("tone", 0.1)])  # nothing surfaced
    make_audit(status="running")
    reviewed = surfaced()
    record_review(audit_id=reviewed.pk, verdict="confirmed", user=alice)
    assert list(review_queue.unreviewed()) == [wanted]


def test_claims_oldest_first_or_highest_score_first(alice):
    old_low = surfaced(0.4, hours_ago=30)
    new_high = surfaced(0.95, hours_ago=1)
    mid = surfaced(0.6, hours_ago=5)
    assert review_queue.claim_next(alice, "oldest") == old_low
    review_queue.release(alice)
    assert review_queue.claim_next(alice, "score") == new_high
    review_queue.release(alice)
    assert [a.pk for a in review_queue.candidates(alice, "score")] == [
        new_high.pk,
        mid.pk,
        old_low.pk,
    ]
    # An unknown order falls back to oldest first.
    assert review_queue.claim_next(alice, "nonsense") == old_low


def test_a_claim_is_stamped_and_a_reviewer_holds_only_one(alice):
    first, second = surfaced(hours_ago=3), surfaced(hours_ago=2)
    claimed = review_queue.claim_next(alice)
    assert claimed == first
    first.refresh_from_db()
    assert first.claimed_by == alice
    assert first.claimed_until > timezone.now() + review_queue.CLAIM_TTL - timedelta(minutes=1)
    # Asking again (a reload) keeps the same audit.
    assert review_queue.claim_next(alice) == first
    # Claiming another (here by skipping the first) gives the first back to the queue.
    assert review_queue.claim_next(alice, skip_ids=[first.pk]) == second
    first.refresh_from_db()
    assert first.claimed_by is None
    assert AuditRun.objects.filter(claimed_by=alice).count() == 1


def test_another_reviewers_live_claim_is_not_handed_out(alice, bob):
    first, second = surfaced(hours_ago=3), surfaced(hours_ago=2)
    assert review_queue.claim_next(alice) == first
    assert review_queue.claim_next(bob) == second
    # Nothing left for a third look from bob but his own.
    assert review_queue.claim_next(bob, skip_ids=[second.pk]) is None
    second.refresh_from_db()
    assert second.claimed_by is None  # released: bob holds nothing now


def test_an_expired_claim_can_be_taken_over(alice, bob):
    only = surfaced()
    assert review_queue.claim_next(alice) == only
    assert review_queue.claim_next(bob) is None
    AuditRun.objects.filter(pk=only.pk).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert review_queue.claim_next(bob) == only
    only.refresh_from_db()
    assert only.claimed_by == bob


def test_a_verdict_releases_the_claim_and_leaves_the_queue(alice):
    first, second = surfaced(hours_ago=2), surfaced(hours_ago=1)
    review_queue.claim_next(alice)
    record_review(audit_id=first.pk, verdict="confirmed", user=alice)
    first.refresh_from_db()
    assert first.claimed_by is None and first.reviewed_at is not None
    assert review_queue.claim_next(alice) == second


def test_progress_counts_today_remaining_and_others_claims(alice, bob):
    audits = [surfaced(hours_ago=h) for h in (5, 4, 3, 2)]
    record_review(audit_id=audits[0].pk, verdict="confirmed", user=alice)
    # A changed verdict on the same audit still counts once.
    record_review(audit_id=audits[0].pk, verdict="unsure", user=alice)
    record_review(audit_id=audits[1].pk, verdict="false_positive", user=bob)
    yesterday = surfaced(hours_ago=1)
    record_review(audit_id=yesterday.pk, verdict="confirmed", user=alice)
    Review.objects.filter(audit=yesterday).update(created_at=timezone.now() - timedelta(days=2))
    AuditRun.objects.filter(pk=yesterday.pk).update(reviewed_at=timezone.now() - timedelta(days=2))
    review_queue.claim_next(bob)
    progress = review_queue.progress(alice)
    assert progress == review_queue.Progress(
        reviewed_today_by_me=1, reviewed_today=2, remaining=2, claimed_by_others=1
    )
    assert review_queue.progress(bob).claimed_by_others == 0


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_reviewers_never_get_the_same_audit(reviewers):
    """Two threads (two DB connections) claim and judge as fast as they can."""
    users = [reviewers("r1"), reviewers("r2")]
    audits = {str(surfaced(hours_ago=i / 10).pk) for i in range(40)}
    start = threading.Barrier(len(users))
    seen: dict[str, list[str]] = {u.username: [] for u in users}
    errors: list[BaseException] = []

    def work(user) -> None:
        try:
            start.wait(timeout=10)
            while True:
                run = review_queue.claim_next(user)
                if run is None:
                    break
                seen[user.username].append(str(run.pk))
                # While this reviewer holds it, the other cannot claim it.
                assert AuditRun.objects.filter(pk=run.pk, claimed_by=user).exists() or (
                    AuditRun.objects.filter(pk=run.pk, reviewed_at__isnull=False).exists()
                )
                record_review(audit_id=run.pk, verdict="confirmed", user=user)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    first, second = seen["r1"], seen["r2"]
    assert not set(first) & set(second)
    assert len(first) == len(set(first)) and len(second) == len(set(second))
    assert set(first) | set(second) == audits
    # One verdict per audit: nobody judged an audit the other had.
    assert Review.objects.count() == len(audits)
    assert first and second, "both reviewers should have had work"


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_on_one_audit_have_one_winner(reviewers):
    users = [reviewers(f"c{i}") for i in range(4)]
    for _round in range(8):
        only = surfaced()
        start = threading.Barrier(len(users))
        got: list[str] = []
        errors: list[BaseException] = []

        def work(user, start=start, got=got, errors=errors) -> None:
            try:
                start.wait(timeout=10)
                if review_queue.claim_next(user) is not None:
                    got.append(user.username)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=work, args=(u,)) for u in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not errors, errors
        assert len(got) == 1, got
        only.refresh_from_db()
        assert only.claimed_by.username == got[0]
        record_review(audit_id=only.pk, verdict="unsure", user=only.claimed_by)


# --- the page --------------------------------------------------------------------------------


def test_queue_page_shows_and_claims_the_next_audit(alice):
    run = surfaced(
        user_input="Is <b>Acme</b> good?",
        response="<script>alert(1)</script> Acme is good.",
        hours_ago=2,
    )
    response = client_for(alice).get(reverse("audits:queue"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="queue-audit-{run.pk}"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "Is &lt;b&gt;Acme&lt;/b&gt; good?" in html
    assert 'data-review-key="c"' in html and "<kbd>c</kbd>" in html
    assert re.search(r"js/review-queue\.[0-9a-f]{12}\.js", html)  # hashed by collectstatic
    run.refresh_from_db()
    assert run.claimed_by == alice


def test_verdict_post_records_a_review_and_advances(alice):
    first, second = surfaced(hours_ago=2), surfaced(hours_ago=1)
    client = client_for(alice)
    client.get(reverse("audits:queue"))
    response = client.post(
        reverse("audits:queue_verdict", args=[first.pk]),
        {"verdict": "false_positive", "comment": " not really ", "order": "oldest"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="review-panel"')
    assert f'id="queue-audit-{second.pk}"' in html
    review = Review.objects.get(audit=first)
    assert (review.verdict, review.comment, review.reviewer) == (
        "false_positive",
        "not really",
        alice,
    )
    assert review.annotation is None
    second.refresh_from_db()
    assert second.claimed_by == alice


def test_verdict_without_javascript_redirects_back_to_the_queue(alice):
    first = surfaced()
    response = client_for(alice).post(
        reverse("audits:queue_verdict", args=[first.pk]), {"verdict": "confirmed", "order": "score"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("audits:queue") + "?order=score"
    assert Review.objects.get(audit=first).verdict == "confirmed"


def test_bad_verdicts_are_400_and_unknown_audits_404(alice):
    run = surfaced()
    client = client_for(alice)
    assert (
        client.post(
            reverse("audits:queue_verdict", args=[run.pk]), {"verdict": "maybe"}
        ).status_code
        == 400
    )
    assert (
        client.post(
            reverse("audits:queue_verdict", args=[run.pk]),
            {"verdict": "confirmed", "comment": "x" * 6000},
        ).status_code
        == 400
    )
    missing = "00000000-0000-0000-0000-000000000000"
    assert (
        client.post(
            reverse("audits:queue_verdict", args=[missing]), {"verdict": "confirmed"}
        ).status_code
        == 404
    )
    assert client.post(reverse("audits:queue_skip", args=[missing])).status_code == 404
    assert client.get(reverse("audits:queue_verdict", args=[run.pk])).status_code == 405
    assert not Review.objects.exists()


def test_skip_releases_and_moves_on_then_all_caught_up(alice, bob):
    first, second = surfaced(hours_ago=2), surfaced(hours_ago=1)
    client = client_for(alice)
    client.get(reverse("audits:queue"))
    response = client.post(
        reverse("audits:queue_skip", args=[first.pk]), headers={"HX-Request": "true"}
    )
    assert f'id="queue-audit-{second.pk}"' in response.content.decode()
    first.refresh_from_db()
    assert first.claimed_by is None
    # The skipped one is free for others.
    assert review_queue.claim_next(bob) == first
    response = client.post(
        reverse("audits:queue_skip", args=[second.pk]), headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert "All caught up" in html and "you skipped" in html
    assert not Review.objects.exists()
    # Starting over brings the skipped ones back (the one bob holds stays his).
    html = client.get(reverse("audits:queue") + "?restart=1").content.decode()
    assert f'id="queue-audit-{second.pk}"' in html


def test_an_empty_queue_is_all_caught_up(alice):
    html = client_for(alice).get(reverse("audits:queue")).content.decode()
    assert "All caught up" in html
    assert "Every surfaced audit has a verdict" in html


def test_highest_score_first_means_the_headline_score_not_the_mean(alice):
    one_bad = make_audit(
        results=[
            result("tone", 0.9, [annotation("condescending", "warning")]),
            result("redflag", 0.0),
            result("links", 0.0),
        ]
    )  # mean 0.3
    evenly = make_audit(
        results=[
            result("tone", 0.6, [annotation("condescending", "warning")]),
            result("redflag", 0.6),
        ]
    )  # mean 0.6
    assert one_bad.overall_score < evenly.overall_score
    assert [a.pk for a in review_queue.candidates(alice, "score")] == [one_bad.pk, evenly.pk]
    html = client_for(alice).get(reverse("audits:queue") + "?order=score").content.decode()
    assert f"queue-audit-{one_bad.pk}" in html
    assert '<span class="score-value">0.90</span>' in html


def test_changing_the_order_hands_back_the_held_audit(alice):
    old_low = surfaced(0.4, hours_ago=30)
    new_high = surfaced(0.95, hours_ago=1)
    client = client_for(alice)
    assert f"queue-audit-{old_low.pk}" in client.get(reverse("audits:queue")).content.decode()
    html = client.get(reverse("audits:queue") + "?order=score").content.decode()
    assert f"queue-audit-{new_high.pk}" in html
    old_low.refresh_from_db()
    assert old_low.claimed_by is None
    # The session remembers the order.
    assert f"queue-audit-{new_high.pk}" in client.get(reverse("audits:queue")).content.decode()


def test_progress_counters_are_on_the_page(alice, bob):
    runs = [surfaced(hours_ago=h) for h in (3, 2, 1)]
    record_review(audit_id=runs[0].pk, verdict="confirmed", user=alice)
    review_queue.claim_next(bob)
    html = client_for(alice).get(reverse("audits:queue")).content.decode()
    assert '<strong id="progress-mine">1</strong>' in html
    assert '<strong id="progress-today">1</strong>' in html
    assert '<strong id="progress-remaining">2</strong>' in html
    assert '<strong id="progress-others">1</strong>' in html


# --- access ----------------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_login(client, db):
    run = surfaced()
    for response in (
        client.get(reverse("audits:queue")),
        client.post(reverse("audits:queue_verdict", args=[run.pk]), {"verdict": "confirmed"}),
        client.post(reverse("audits:queue_skip", args=[run.pk])),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")
    assert not Review.objects.exists()
    run.refresh_from_db()
    assert run.claimed_by is None


def test_non_staff_users_are_refused(db, reviewers):
    plain = reviewers("plain", staff=False)
    run = surfaced()
    client = client_for(plain)
    assert client.get(reverse("audits:queue")).status_code == 403
    assert (
        client.post(
            reverse("audits:queue_verdict", args=[run.pk]), {"verdict": "confirmed"}
        ).status_code
        == 403
    )
    assert client.post(reverse("audits:queue_skip", args=[run.pk])).status_code == 403
    assert not Review.objects.exists()


def test_staff_without_the_review_permission_can_look_but_not_judge(db, reviewers):
    viewer = reviewers("viewer", perm=False)
    run = surfaced()
    client = client_for(viewer)
    html = client.get(reverse("audits:queue")).content.decode()
    assert f"queue-audit-{run.pk}" in html
    assert 'data-review-key="c"' not in html
    assert 'data-review-key="s"' in html
    response = client.post(reverse("audits:queue_verdict", args=[run.pk]), {"verdict": "confirmed"})
    assert response.status_code == 403
    assert not Review.objects.exists()


def test_a_viewer_who_may_not_judge_does_not_hold_audits_back_from_reviewers(alice, reviewers):
    viewer = reviewers("viewer", perm=False)
    run = surfaced()
    html = client_for(viewer).get(reverse("audits:queue")).content.decode()
    assert f"queue-audit-{run.pk}" in html  # they may look...
    run.refresh_from_db()
    assert run.claimed_by is None  # ...but their look claims nothing
    assert review_queue.progress(alice).claimed_by_others == 0
    html = client_for(alice).get(reverse("audits:queue")).content.decode()
    assert f"queue-audit-{run.pk}" in html
    run.refresh_from_db()
    assert run.claimed_by == alice

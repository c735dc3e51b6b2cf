# Candidate configurations (analyzers.candidates) and what the change log keeps of a
# promotion or a restore: the reason, the candidate and the evidence.

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("analyzers", "0003_ratelimitcounter"),
    ]

    operations = [
        migrations.CreateModel(
            name="CandidateConfig",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("config", models.JSONField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("shadow", "Shadow"),
                            ("promoted", "Promoted"),
                            ("discarded", "Discarded"),
                        ],
                        default="shadow",
                        max_length=10,
                    ),
                ),
                (
                    "shadow_sample_rate",
                    models.FloatField(
                        default=1.0,
                        validators=[
                            django.core.validators.MinValueValidator(0.0),
                            django.core.validators.MaxValueValidator(1.0),
                        ],
                    ),
                ),
                ("shadow_judged", models.BooleanField(default=False)),
                ("created_by", models.CharField(blank=True, default="", max_length=200)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("shadow_skipped", models.PositiveIntegerField(default=0)),
                ("replay_status", models.CharField(blank=True, default="", max_length=10)),
                ("replay_done", models.PositiveIntegerField(default=0)),
                ("replay_total", models.PositiveIntegerField(default=0)),
                ("replay_judged", models.BooleanField(default=False)),
                ("replay_until", models.DateTimeField(blank=True, null=True)),
                ("replay_error", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "candidate configuration",
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["status"], name="candidate_status_idx")],
            },
        ),
        migrations.AddField(
            model_name="configchange",
            name="reason",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="configchange",
            name="candidate",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="analyzers.candidateconfig",
            ),
        ),
        migrations.AddField(
            model_name="configchange",
            name="evidence",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]

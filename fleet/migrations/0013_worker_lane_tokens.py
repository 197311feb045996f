from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0012_catalog_model_description'),
    ]

    operations = [
        migrations.AddField(
            model_name='worker',
            name='lane_tokens',
            field=models.PositiveIntegerField(default=0, help_text='A lane worker, kept for short prompts: it takes only prompts of at most this many tokens, and a short prompt goes to it first (docs/classroom.md, a card for questions). 0: any prompt.'),
        ),
    ]

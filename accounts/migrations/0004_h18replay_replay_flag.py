from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='classroom',
            name='is_replay',
            field=models.BooleanField(default=False, help_text='Made by `class_replay` (a load, not people): left out of usage and progress pages.'),
        ),
        migrations.AddField(
            model_name='user',
            name='is_replay',
            field=models.BooleanField(default=False, help_text='A student made by `class_replay` (research/replay_services.py), not a person: left out of the teacher\'s usage and of Ground 0 progress.'),
        ),
    ]

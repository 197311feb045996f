from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0010_classes_in_site'),
    ]

    operations = [
        migrations.AddField(
            model_name='classroom',
            name='chat_enabled',
            field=models.BooleanField(default=True, help_text="The students may use the chat page (/chat/). Off: it says so and every open chat page's key is revoked at once; their own keys and editors are unaffected.", verbose_name='chat page on'),
        ),
        migrations.AddField(
            model_name='apikey',
            name='chat_session',
            field=models.CharField(blank=True, db_index=True, help_text='Set: the chat page\'s key for one sign-in session (a fingerprint of it), held in an HttpOnly cookie, never shown; revoked at sign-out. Empty: a key the student made.', max_length=64),
        ),
    ]

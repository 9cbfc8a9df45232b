"""Public query phrasings per intent (S4). A query is written from its slot and public intent only:
it never sees M or M', never names a protected attribute or a direct synonym (lexicon check).

The realiser composes a query string from a base phrasing of the intent, an opener and a closing
request (:func:`query_variants`): about 600 distinct strings per intent, so a 10,240-turn build
uses no string more than a few times.
"""
from __future__ import annotations

import functools
import itertools

OPENERS: tuple[str, ...] = ("", "Quick question: ", "Hi! ", "Hey, ", "Hello. ", "Can you help? ",
                            "I need some advice. ", "Question for you: ", "Okay, ", "So, ")
CLOSERS: tuple[str, ...] = ("", " Keep it short, please.", " A few bullet points would be great.", " Thanks!",
                            " I'd like something practical.", " What would you suggest?", " Please be specific.",
                            " Nothing too complicated.", " Just the basics.", " I'm open to ideas.")


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != "I " and text[:2] != "I'" else text


@functools.cache
def query_variants(intent: str) -> tuple[str, ...]:
    """Every composed query string of ``intent``: base phrasing x opener x closer (deterministic order)."""
    out = []
    for base, op, cl in itertools.product(QUERIES[intent], OPENERS, CLOSERS):
        b = _lower_first(base) if op.endswith(", ") else base
        out.append(f"{op}{b}{cl}")
    return tuple(out)

QUERIES: dict[str, tuple[str, ...]] = {
    # health
    "health.checkup_prep": (
        "I have a checkup coming up. What should I ask my doctor?",
        "How should I prepare for my next doctor's appointment?",
        "What should I bring to a routine medical visit?",
        "Can you help me make a list of things to raise at my next checkup?",
        "Any tips for getting the most out of a short doctor's visit?",
        "What questions are worth asking at a yearly physical?",
    ),
    "health.supplement_advice": (
        "Are there any supplements you'd suggest for me?",
        "Which vitamins are worth taking every day?",
        "Should I be taking anything extra to stay healthy?",
        "What do you think about daily supplements for someone like me?",
        "Can you suggest a simple supplement routine?",
        "Is a multivitamin enough, or should I add something?",
    ),
    "health.energy_levels": (
        "How can I keep my energy up through the afternoon?",
        "I feel drained by mid-afternoon. What can I do?",
        "Any tips for more steady energy during the day?",
        "What habits would help me feel less tired at work?",
        "How do I avoid the afternoon slump?",
        "What can I change to have more energy in the evenings?",
    ),
    "health.sleep_improvement": (
        "How can I sleep better?",
        "Any advice for falling asleep faster?",
        "I keep waking up at night. What should I try?",
        "Can you suggest a better bedtime routine for me?",
        "What helps with getting more restful sleep?",
        "How do I fix my sleep schedule?",
    ),
    "health.stress_relief": (
        "What are some quick ways to relieve stress?",
        "I've been feeling tense lately. Any ideas to unwind?",
        "How can I manage stress better day to day?",
        "Can you suggest a few calming techniques?",
        "What should I do when I feel overwhelmed?",
        "Any tips for switching off after a long day?",
    ),
    "health.eye_strain": (
        "My eyes get tired from screens. What can I do?",
        "How do I reduce eye strain at the computer?",
        "Any tips for screen-tired eyes?",
        "What's a good routine to protect my eyes during long screen days?",
        "How often should I take breaks from the screen?",
    ),
    "health.first_aid_kit": (
        "What should I keep in a home first-aid kit?",
        "Can you give me a checklist for a basic first-aid box?",
        "What medical supplies should every home have?",
        "Help me stock a small first-aid kit for the house.",
        "What goes into a good travel first-aid pouch?",
    ),
    # food
    "food.meal_plan": (
        "Can you put together a meal plan for this week?",
        "What should I cook for dinner over the next five days?",
        "Help me plan my meals for the week.",
        "I need a simple weekly menu. Any ideas?",
        "Could you draft a week of lunches and dinners for me?",
        "What would a good meal plan for the next few days look like?",
    ),
    "food.quick_dinner": (
        "What's a quick dinner I can make tonight?",
        "I only have twenty minutes. What should I cook?",
        "Any easy weeknight dinner ideas?",
        "Suggest a fast dinner for after work.",
        "What can I throw together for dinner without much effort?",
        "Give me a simple dinner recipe for a busy evening.",
    ),
    "food.snack_ideas": (
        "What are some good snacks to keep around?",
        "Any snack ideas for the afternoon?",
        "What should I snack on between meals?",
        "Suggest a few snacks I can take to work.",
        "What are some easy snacks for a long day out?",
        "I need better snack options. Ideas?",
    ),
    "food.grocery_list": (
        "Can you write me a grocery list for the week?",
        "What should I buy on my next supermarket trip?",
        "Help me put together a shopping list.",
        "What staples should I always have in the kitchen?",
        "Make me a grocery list for a week of home cooking.",
        "What should go on this weekend's shopping list?",
    ),
    "food.breakfast_ideas": (
        "What should I have for breakfast this week?",
        "Any breakfast ideas that keep me full until lunch?",
        "Suggest a few easy breakfasts.",
        "I'm bored of my breakfast. What else could I eat?",
        "What's a good breakfast before a busy morning?",
        "Give me some weekend breakfast ideas.",
    ),
    "food.eating_out": (
        "I'm going out to a restaurant tonight. What should I order?",
        "Any tips for choosing a meal when eating out?",
        "We're getting takeaway with friends. What should I pick?",
        "How do I order sensibly at a restaurant?",
        "What's a good choice at an Italian restaurant?",
        "I have a work dinner out this week. What should I go for?",
    ),
    "food.food_storage": (
        "How do I keep fresh herbs from wilting?",
        "What's the best way to store leftovers?",
        "How long do cooked meals keep in the fridge?",
        "Any tips for freezing bread and vegetables?",
        "How should I organise my fridge so food lasts?",
    ),
    "food.kitchen_tools": (
        "What kitchen tools are worth buying?",
        "Is a slow cooker or a pressure cooker more useful?",
        "Which knives does a home cook really need?",
        "What gadgets make weeknight cooking easier?",
        "Any recommendations for a good non-stick pan?",
    ),
    # fitness
    "fitness.workout_plan": (
        "Can you make me a workout plan for this week?",
        "What exercise routine would you suggest for me?",
        "Help me plan three workouts this week.",
        "What should my weekly training look like?",
        "Give me a simple exercise plan to follow.",
        "Can you suggest a balanced workout routine?",
    ),
    "fitness.weekly_activity": (
        "How much should I move each week?",
        "How can I fit more activity into my week?",
        "What's a realistic weekly activity goal for me?",
        "How should I spread exercise across the week?",
        "Any ideas to be more active on weekdays?",
        "How do I build more movement into a normal week?",
    ),
    "fitness.stretch_routine": (
        "Can you suggest a short stretching routine?",
        "What stretches should I do in the morning?",
        "Any stretches for a stiff back?",
        "Give me a ten-minute stretch routine.",
        "What should I stretch after sitting all day?",
        "Which stretches help before bed?",
    ),
    "fitness.running_tips": (
        "Any tips for getting into running?",
        "How should I pace my runs?",
        "What's a good warm-up before a run?",
        "How can I run a bit further each week?",
        "Any advice for running in hot weather?",
        "How often should I run each week?",
    ),
    "fitness.home_workout": (
        "What's a good workout I can do at home?",
        "Can you give me a living-room workout?",
        "How can I exercise at home without equipment?",
        "Suggest a 20-minute home workout.",
        "What can I do at home on rainy days to stay fit?",
        "Give me a home routine for strength.",
    ),
    "fitness.sports_gear": (
        "What should I look for in a pair of trainers?",
        "Which fitness tracker is worth getting?",
        "What gear do I need to start cycling?",
        "Do I need special clothes for the gym?",
        "What's a good water bottle for workouts?",
    ),
    "fitness.motivation": (
        "How do I stay motivated to exercise?",
        "I keep skipping workouts. Any advice?",
        "What helps you stick with a fitness habit?",
        "How can I make exercise more fun?",
        "Any tricks for getting out the door to train?",
    ),
    # finance
    "finance.monthly_budget": (
        "Can you help me set up a monthly budget?",
        "How should I split my money each month?",
        "What does a sensible monthly budget look like for me?",
        "Help me plan my spending for next month.",
        "How do I build a budget I can stick to?",
        "Can you draft a simple budget for the month?",
    ),
    "finance.savings_plan": (
        "How should I approach saving money right now?",
        "What's a good savings plan for me?",
        "How much should I be putting aside each month?",
        "Where should any spare money go first?",
        "Can you suggest a simple plan for my savings?",
        "What should I do with money left over at the end of the month?",
    ),
    "finance.big_purchase": (
        "I'm thinking about buying a new laptop. How should I plan for it?",
        "How do I decide whether a big purchase is worth it?",
        "What's the best way to pay for a large purchase?",
        "Should I buy a second-hand car now or wait?",
        "How should I plan for a new sofa?",
        "Any advice before I spend a lot on one item?",
    ),
    "finance.bill_planning": (
        "How should I organise my bills this month?",
        "What's the best way to keep track of due dates for bills?",
        "Help me plan which bills to pay when.",
        "How can I stop bills from catching me by surprise?",
        "Can you help me schedule my payments for the month?",
        "What order should I pay my bills in?",
    ),
    "finance.gift_budget": (
        "How much should I spend on birthday gifts this year?",
        "How do I plan a budget for holiday presents?",
        "Any ideas for keeping gift spending under control?",
        "What's a sensible amount for a wedding gift?",
        "Help me plan gifts for the family this season.",
        "How can I give nice gifts without overspending?",
    ),
    "finance.tax_prep": (
        "What do I need to get ready for my tax return?",
        "Any tips for doing my taxes this year?",
        "What documents should I collect for taxes?",
        "How do I organise receipts for tax time?",
        "When should I start on my tax return?",
    ),
    "finance.banking_app": (
        "Which banking app features are actually useful?",
        "How can I use my bank's app to stay organised?",
        "Is it worth setting up spending alerts on my phone?",
        "How do I set up savings pots in a banking app?",
        "What's the safest way to use mobile banking?",
    ),
    # work
    "work.weekly_priorities": (
        "Can you help me plan my priorities for this week?",
        "What should I focus on this week?",
        "How do I organise my week so the important things get done?",
        "Help me set three goals for the week.",
        "How should I structure my weekdays?",
        "What's a good way to plan my week on Monday morning?",
    ),
    "work.career_growth": (
        "What should I do to move forward in my career?",
        "How can I build new skills this year?",
        "Any advice on the next step in my career?",
        "What would help me grow professionally?",
        "How do I plan my career for the next year?",
        "Which skills are worth investing time in?",
    ),
    "work.networking": (
        "How can I get better at networking?",
        "Any tips for reaching out to people in my field?",
        "How do I make useful professional contacts?",
        "What should I say at a networking event?",
        "How do I use LinkedIn well?",
        "How can I keep in touch with old colleagues?",
    ),
    "work.workday_breaks": (
        "How should I schedule breaks during my workday?",
        "What are good ways to take breaks at work?",
        "How often should I step away from my desk?",
        "Help me plan breaks into a long day.",
        "What's a good lunch-break routine?",
        "How do I remember to take breaks when I'm busy?",
    ),
    "work.commute": (
        "How can I make my commute less tiring?",
        "What's a good way to use commuting time?",
        "Any ideas for podcasts or tasks on the train?",
        "How can I make my journey to work easier?",
        "Is it worth changing my commuting hours?",
        "How do I make the trip to work less stressful?",
    ),
    "work.meeting_prep": (
        "How should I prepare for a big meeting?",
        "Any tips for running a short, useful meeting?",
        "What should I do before presenting to my team?",
        "How do I prepare an agenda?",
        "How can I speak up more in meetings?",
    ),
    "work.email_overload": (
        "My inbox is out of control. How do I manage it?",
        "Any tips for handling too many emails?",
        "How often should I check email?",
        "How do I get to inbox zero?",
        "What's a good system for sorting messages?",
    ),
    # schedule
    "schedule.weekday_routine": (
        "Can you help me plan a weekday routine?",
        "What should a typical weekday look like for me?",
        "How should I structure my days this week?",
        "Help me set up a daily schedule.",
        "What's a realistic routine from morning to evening?",
        "How can I organise my weekdays better?",
    ),
    "schedule.weekend_plan": (
        "What should I do this weekend?",
        "Any ideas for a relaxing weekend?",
        "Can you plan a nice Saturday for me?",
        "What's a fun way to spend Sunday?",
        "Suggest some weekend activities.",
        "Help me plan my weekend.",
    ),
    "schedule.travel_plan": (
        "I want to take a short trip next month. How should I plan it?",
        "Can you help me plan a weekend away?",
        "What should I think about when planning a trip?",
        "Help me put together a travel itinerary.",
        "What's a good plan for a three-day city break?",
        "How should I plan a long train journey?",
    ),
    "schedule.holiday_plan": (
        "How should I spend my time off over the holidays?",
        "Any ideas for my summer holiday?",
        "Help me plan a week off work.",
        "What's a good plan for a long bank-holiday weekend?",
        "How should I use my leave days this year?",
        "What can I do during the winter break?",
    ),
    "schedule.morning_routine": (
        "Can you suggest a good morning routine?",
        "How should I start my mornings?",
        "What's a calm way to begin the day?",
        "Help me plan my first hour after waking up.",
        "How can I make my mornings less rushed?",
        "What should a productive morning look like?",
    ),
    "schedule.chores": (
        "How should I organise my household chores?",
        "What's a good weekly cleaning schedule?",
        "How do I split chores across the week?",
        "Any tips for keeping on top of laundry?",
        "How can I spend less time on housework?",
    ),
    "schedule.reading_time": (
        "How can I fit more reading into my week?",
        "When is a good time to read every day?",
        "How do I build a reading habit?",
        "Any tips for finishing more books?",
        "How can I read more without giving up sleep?",
    ),
    # generic-only intents with a one-position read set (neutral queries of every group)
    "health.health_records": (
        "How should I organise my health paperwork?",
        "What's a good way to keep track of my medical documents?",
        "Should I keep copies of my test results at home?",
        "How do I keep my health records in one place?",
        "What health documents are worth keeping?",
    ),
    "health.booking_tips": (
        "What's the best way to book a routine appointment?",
        "How do I get an appointment slot that suits me?",
        "Any tips for not missing appointments?",
        "How early should I book a routine visit?",
        "What should I do if I need to reschedule an appointment?",
    ),
    "food.lunchbox": (
        "What should I put in a packed lunch?",
        "Any ideas for lunches I can take with me?",
        "How do I make packed lunches less boring?",
        "What's a good lunchbox for a long day out?",
        "Give me some easy lunch-to-go ideas.",
    ),
    "food.cooking_skills": (
        "Which cooking skill should I learn next?",
        "How can I get better at cooking?",
        "What's a basic technique every home cook should know?",
        "How do I learn to cook without recipes?",
        "Any tips for improving my knife skills?",
    ),
    "food.hydration": (
        "How can I remember to drink more water?",
        "What are good ways to stay hydrated during the day?",
        "How much water should I aim for?",
        "Any tips for drinking enough when I'm busy?",
        "What can I drink instead of plain water?",
    ),
    "fitness.step_count": (
        "How can I get more steps in each day?",
        "What are easy ways to walk more?",
        "How do I hit a daily step target?",
        "Any tips for moving more during the day?",
        "How can I add walking to my routine?",
    ),
    "fitness.warm_up": (
        "What's a good warm-up before exercise?",
        "How long should I warm up for?",
        "Can you suggest a quick warm-up routine?",
        "What should I do before a workout to avoid stiffness?",
        "Which warm-up moves are the most useful?",
    ),
    "fitness.club_finder": (
        "How do I find a local sports club?",
        "What should I look for in a fitness class?",
        "How can I find a group to exercise with?",
        "Is it worth joining a club for my hobby?",
        "How do I pick a class that suits me?",
    ),
    "finance.statements": (
        "How long should I keep bank statements?",
        "Which financial documents should I file away?",
        "How do I organise my account paperwork?",
        "Should I keep paper copies of statements?",
        "What's a simple filing system for money paperwork?",
    ),
    "finance.money_goals": (
        "How do I set a money goal I can stick to?",
        "What's a good way to track progress on a money target?",
        "How do I pick a realistic financial goal?",
        "Any tips for staying motivated with a money goal?",
        "How should I write down my money goals?",
    ),
    "finance.receipts": (
        "How should I keep track of receipts?",
        "What's a good way to store warranties and receipts?",
        "Should I scan my receipts?",
        "How long do I need to keep receipts?",
        "Any tips for organising paperwork from purchases?",
    ),
    "work.desk_setup": (
        "How should I set up my desk?",
        "What makes a comfortable workspace?",
        "Any tips for a better desk setup?",
        "How high should my screen be?",
        "What should I keep on my desk?",
    ),
    "work.focus_music": (
        "What kind of music helps with focus?",
        "Is background noise good for concentration?",
        "How can I use sound to focus better?",
        "Any tips for concentrating in a noisy place?",
        "Should I listen to music while I work?",
    ),
    "work.presentation_skills": (
        "How can I present more clearly?",
        "Any tips for giving a short talk?",
        "How do I make better slides?",
        "How can I feel calmer when presenting?",
        "What makes a presentation easy to follow?",
    ),
    "schedule.calendar_app": (
        "How should I use a calendar app?",
        "What's a good way to keep track of plans?",
        "Any tips for organising my calendar?",
        "How do I stop double-booking myself?",
        "Should I use one calendar for everything?",
    ),
    "schedule.gift_reminders": (
        "How can I remember everyone's birthdays?",
        "How do I plan presents ahead of time?",
        "What's a good system for gift reminders?",
        "Any tips for not forgetting special dates?",
        "How early should I start planning presents?",
    ),
}

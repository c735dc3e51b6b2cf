"""Company detection by word frequency: a sentence-initial ordinary English word
is no company, so its sentence is kept; a company name still makes an ungrounded claim."""

from __future__ import annotations

import pytest
from test_guardrails_rules import audit, types

from analyzers.engine.contract import Source
from analyzers.engine.guardrails.grounding import is_ordinary_word

ORDINARY_PROSE = [
    "Typical stores see a 20% lift in conversion after tuning relevance.",
    "Average order value rose 12% once synonyms were added.",
    "Leading retailers report a 15% drop in zero-result searches.",
    "Modern search engines cut latency by 40% with caching.",
    "Most shoppers abandon a site within 10% of the session when results are poor.",
    "Successful teams usually measure a 5% gain in the first month.",
    "Smaller catalogues often convert 3% better with good facets.",
    "Larger catalogues need 2x more tuning to reach the same relevance.",
    "Global brands expect a 25% share of revenue from search.",
    "Independent boutiques see a 9% uplift from merchandising rules.",
    "Online shoppers who search convert 1.8x more often.",
    "European merchants saw 30% more mobile traffic last year.",
    "Seasonal peaks can double traffic, a 100% increase.",
    "Good autocomplete lifts conversion by 6% in most tests.",
    "Better ranking raised click-through by 11% in the pilot.",
    "Early adopters reported a $2M increase in annual revenue.",
    "Fashion retailers usually see return rates drop 4%.",
    "Grocery sites gain 7% more basket items with recommendations.",
    "Luxury brands care less about speed, yet a 1% lift matters.",
    "Sports retailers saw 14% more searches during the tournament.",
    "Beauty shoppers use filters 35% more than average.",
    "Home furnishing sites need 3x more images per product.",
    "Independent research shows a 19% gain from personalisation.",
    "Fast sites convert 8% better than slow ones.",
    "Smart defaults reduce support tickets by 22%.",
    "Recent studies found a 13% lift from visual search.",
    "Popular queries account for 60% of all searches.",
    "Several merchants measured a 10% increase in revenue per visit.",
    "Simple synonyms fixed 45% of the failed queries.",
    "Common misspellings cause 12% of zero-result pages.",
    "Strong merchandising adds 5% to the average basket.",
    "Result: Average basket size grew 12% in six weeks.",
    "Mobile visitors now make up 70% of traffic.",
    "Traditional keyword search misses 30% of intent.",
]

COMPANY_CLAIMS = [
    "Zalando grew conversion by 35% after switching.",
    "Shopify merchants saw a 25% lift with our app.",
    "Wayfair cut zero-result searches by 40%.",
    "Farfetch increased revenue per search by 18%.",
    "Boohoo reported 3x more clicks on suggestions.",
    "Lidl improved its search conversion by 21%.",
    "Allbirds saw a 9% lift in average order value.",
    "Last year, Nike lifted conversion by 17% with us.",
    "Our work with Sephora raised revenue by $3M.",
    "In one quarter, Coolblue grew search revenue by 28%.",
    "After the launch, Amazon saw a 12% lift on our widget.",
]


@pytest.mark.parametrize("sentence", ORDINARY_PROSE)
def test_a_sentence_starting_with_an_ordinary_word_is_kept(sentence):
    result = audit(sentence)
    assert "UNGROUNDED_CUSTOMER_CLAIM" not in types(result)
    assert result.cleaned_response == sentence


@pytest.mark.parametrize("sentence", COMPANY_CLAIMS)
def test_a_claim_about_an_unknown_company_is_still_removed(sentence):
    result = audit(sentence + " Ask us for details.")
    assert types(result) == ["UNGROUNDED_CUSTOMER_CLAIM"]
    assert result.cleaned_response == "Ask us for details."


def test_a_frequent_word_that_names_a_source_company_is_a_company_at_the_start():
    sentence = "Target grew conversion by 31% with faceted search."
    assert audit(sentence).cleaned_response == sentence  # an ordinary word at the start
    result = audit(
        sentence, sources=[Source(title="Target case", text="Target grew 12%", company="Target")]
    )
    assert types(result) == ["UNGROUNDED_CUSTOMER_CLAIM"]  # 31% is not in its sources


def test_word_frequency_decides_not_a_hand_list():
    assert is_ordinary_word("typical") and is_ordinary_word("most")
    assert is_ordinary_word("leading") and is_ordinary_word("modern")
    assert not is_ordinary_word("zalando") and not is_ordinary_word("shopify")

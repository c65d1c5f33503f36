"""Whether a message is small talk: no word in it names a subject.

"how are you today", "yes please", "没问题", "谢谢你的帮助": greetings,
thanks, acknowledgements and requests to go on say nothing a memory is
about, yet their words are in every chat ("How can I help you today?",
"Yes, please do"), and a chat vault's BM25 counted such a word as most of
the message (one common word matched is all of a one-word message): in a
vault of 100 notes and chats, "how are you today" and "yes please" were
hinted. A message whose every word is a function word, a word of small
talk or one of the commonest verbs and adverbs (``bridge.STOP``, the words
the dictionary does not translate for the same reason) matches memories
by its meaning alone, on the dense signal's stricter curve, as a message
of numbers alone does.

A message with one word outside those lists ("how is the deploy today?",
"狗在吃什么药") is read as before. Chinese is read by removing the phrases
of small talk below and the characters that are grammar
(``bridge.FUNCTION_CHARS``), in Simplified or Traditional characters:
nothing left, no subject.
"""

from __future__ import annotations

import re
import unicodedata

from marchdb import bridge
from marchdb.fts import CJK_CHAR, cjk_chars

#: Chinese greetings, thanks, apologies, acknowledgements, requests to go
#: on or to wait, words of the day, and the commonest verbs of talk: the
#: Chinese side of ``bridge.STOP``'s small talk, in Simplified and
#: Traditional characters. Not 开 (open): 开会 is a meeting.
PHRASES_ZH = tuple(
    sorted(
        """你好 您好 大家好 哈喽 嗨 早上好 早安 上午好 中午好 下午好 晚上好 晚安 再见 拜拜 回头见 一会儿见
        谢谢 多谢 感谢 谢了 辛苦了 辛苦 不客气 不用谢 没关系 没事 没问题 对不起 抱歉 不好意思 早 谢 拜
        好的 好吧 好啊 好呀 好滴 行 行吧 可以 是的 对的 对 嗯 哦 噢 哈 嘿 呵 嘻 哇 唉
        收到 明白 了解 懂了 知道 清楚 确定 当然 肯定 同意 赞 棒 厉害 完美 不错 太好 搞定 没毛病 这样 嗯哼
        继续 开始 接着 然后 下一步 再来 再说一遍 重复 等等 稍等 等一下 一下 请 麻烦 帮忙 帮助 帮
        今天 明天 昨天 现在 刚才 马上 早上 晚上 上午 下午 一遍 一次 怎么样 如何 怎样 什么
        做 干 搞 说 讲 聊 问 看 想 觉得 认为 去 来 走 用 给 告诉 需要 应该 东西 事情 事 话 好
        一會兒見 不客氣 不用謝 不錯 什麼 來 再來 再見 再說一遍 剛纔 剛才 厲害 告訴 哈嘍 哈囉 問 回頭見 多謝 對
        對不起 對的 幫 幫助 幫忙 幹 怎樣 怎麼樣 感謝 應該 東西 沒事 沒問題 沒關係 然後 現在 當然 瞭解 確定 給 繼續
        覺得 話 認爲 認為 說 請 講 謝 謝了 謝謝 贊 讚 重複 開始 馬上 麻煩 沒毛病 這樣""".split(),
        key=len,
        reverse=True,
    )
)
#: English interjections and acknowledgements ``bridge.STOP`` leaves out,
#: with chat's shorthand for them ("thx", "np", "kk").
WORDS_EN = frozenset(
    """hmm hm um uh oh ah aha wow haha lol yeah yep yup nope sure alright cool awesome
    thank thx thanx thnx ty tysm np kk okey okie dokie yo cheers gotcha noted understood worries
    u ur pls plz lmao hehe xd""".split()
)
#: ``bridge.FUNCTION_CHARS`` in their Traditional forms, and the
#: sentence-final particles of chat (谢谢啦, 好嘞, 好哒) as 吧 and 呀 are.
FUNCTION_CHARS = bridge.FUNCTION_CHARS | frozenset("個們嗎對幾從於會沒爲為給與誰讓這還麼啦嘛咯喽嘞哒呐哟呦")
_PHRASES = re.compile("|".join(map(re.escape, PHRASES_ZH)))
#: Words of ``bridge.STOP`` that name a subject once they are someone's:
#: "what about my back?" (not "be back soon"), "our way of deploying", "my
#: part". "your" is left out: "thanks for your time" and "your help" are talk.
OWNED_NOUNS = frozenset("back part reason time times way look lot kind sort use thing things".split())
_OWNED = re.compile(r"\b(?:my|our|his|her|their)\s+([a-z]+)", re.IGNORECASE)


def small_talk(text: str, terms: list[str]) -> bool:
    """Whether ``text`` (whose query terms are ``terms``, ``fts.query_terms``)
    names no subject: every term a word of ``bridge.STOP`` or ``WORDS_EN``,
    or a piece of Chinese small talk, and none of them someone's
    (``OWNED_NOUNS``). A message with no term at all is left to the rules
    that read it already (numbers, nonsense)."""
    if not terms:
        return False
    if any(m.group(1).lower() in OWNED_NOUNS for m in _OWNED.finditer(text)):
        return False
    if any(not CJK_CHAR.search(term) and term not in bridge.STOP and term not in WORDS_EN for term in terms):
        return False
    if not any(CJK_CHAR.search(term) for term in terms):
        return True
    rest = _PHRASES.sub("", unicodedata.normalize("NFKC", text))
    return all(c in FUNCTION_CHARS for c in cjk_chars(rest))

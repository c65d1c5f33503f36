"""Probe pairs used to calibrate a model's cosine scale (see ``calibrate``).

Each pair is (a message an agent might see, a memory text that answers it):
mostly metadata (name, description, tags), some long body paragraphs.
Pairs cover English, Simplified and Traditional Chinese and both directions
across English and Chinese. Off-diagonal combinations (a message with another pair's memory)
are the "unrelated" sample; the diagonal is the "related" sample. Topics are
deliberately far apart so the off-diagonal really is unrelated. (``marchdb
model check`` has its own pairs: ``selftest``.)
"""

from __future__ import annotations

PAIRS: list[tuple[str, str, str]] = [
    # (language, message, memory metadata)
    (
        "en",
        "Why is the prompt cache missing so often?",
        "Context cache ordering\nPut volatile layers after the large stable context or the prefix cache is invalidated\ncache architecture",
    ),
    (
        "en",
        "How do I rotate the database credentials?",
        "Database credential rotation\nSecrets live in the vault; rotate them monthly with the ops script\nsecurity postgres",
    ),
    (
        "en",
        "What did we decide about the logo colors?",
        "Brand palette decision\nThe logo uses deep teal and warm sand; red was rejected as too aggressive\ndesign branding",
    ),
    (
        "en",
        "The nightly backup job failed again",
        "Backup job failures\nThe nightly backup fails when the disk is above 90 percent; prune old snapshots first\nops backup",
    ),
    (
        "en",
        "Which airline does Sam prefer for long trips?",
        "Sam's travel preferences\nSam prefers aisle seats and flies with KLM on long-haul routes\ntravel preferences",
    ),
    (
        "en",
        "How should I format dates in the API responses?",
        "API date format\nAll API timestamps are ISO 8601 in UTC with a trailing Z\napi conventions",
    ),
    (
        "en",
        "My sourdough bread came out flat",
        "Sourdough troubleshooting\nFlat loaves mean an over-proofed dough or a weak starter; shorten the bulk ferment\nbaking",
    ),
    (
        "en",
        "When is the quarterly tax payment due?",
        "Quarterly estimated taxes\nEstimated tax payments are due in April, June, September and January\nfinance taxes",
    ),
    (
        "en",
        "The test suite is flaky on CI",
        "Flaky CI tests\nTests that share a temporary directory fail at random under parallel runs; give each its own\nci testing",
    ),
    (
        "en",
        "What medication is the dog taking?",
        "Dog's medication\nBiscuit takes half a tablet of carprofen with breakfast for joint pain\npets health",
    ),
    (
        "en",
        "How do we deploy the frontend?",
        "Frontend deployment\nThe frontend deploys from the main branch through the static site pipeline\ndeploy web",
    ),
    (
        "en",
        "Remind me how the user likes code reviews done",
        "Code review style\nThe user wants short review comments, one issue per comment, with a suggested fix\npreferences review",
    ),
    (
        "en",
        "Memory usage of the indexer keeps growing",
        "Indexer memory leak\nThe indexer leaked memory by caching every parsed file; the cache is now bounded\nperformance bug",
    ),
    (
        "en",
        "What is the wifi password at the cabin?",
        "Cabin wifi\nThe cabin router password is on the back of the fridge calendar\nhome cabin",
    ),
    (
        "en",
        "Which GPU did we benchmark the model on?",
        "Model benchmark hardware\nThe embedding benchmarks ran on a single consumer GPU with 24 GB of memory\nbenchmark ml",
    ),
    (
        "en",
        "How do I train for a half marathon?",
        "Half marathon plan\nTwelve weeks, three easy runs and one long run a week, tapering in the last ten days\nrunning fitness",
    ),
    (
        "zh",
        "为什么提示缓存总是失效？",
        "上下文缓存顺序\n高频变化层不能放在大块稳定上下文前面，否则会污染前缀缓存\n缓存 架构",
    ),
    ("zh", "数据库密码应该多久更换一次？", "数据库凭据轮换\n密钥保存在保险库里，每月用运维脚本轮换一次\n安全 数据库"),
    ("zh", "周末去哪里爬山比较好？", "周末爬山路线\n香山适合半天往返，凤凰岭适合全天徒步\n户外 爬山"),
    ("zh", "怎么做红烧肉才不会太腻？", "红烧肉做法\n先焯水再煸出油脂，收汁前撇去浮油，口感就不腻\n烹饪"),
    ("zh", "用户喜欢什么样的回答风格？", "回答风格偏好\n用户喜欢简洁直接的回答，先给结论再解释原因\n偏好 沟通"),
    (
        "zh",
        "孩子的疫苗下一针是什么时候？",
        "疫苗接种计划\n下一针是十二月初的流感疫苗，需要提前在社区医院预约\n家庭 健康",
    ),
    (
        "zh",
        "服务器磁盘满了怎么办？",
        "磁盘空间告警处理\n先清理旧日志和过期快照，再检查是否有大文件被进程占用\n运维 磁盘",
    ),
    (
        "zh",
        "我们的论文投稿截止日期是哪天？",
        "论文投稿截止\n会议论文的截止日期是三月十五日，摘要需要提前一周提交\n科研 截止日期",
    ),
    ("zh", "如何提高英语口语？", "英语口语练习\n每天跟读二十分钟播客，每周和外教对话一次\n学习 英语"),
    ("zh", "报销流程需要哪些材料？", "报销流程\n报销需要发票原件、审批单和付款截图，每月二十号前提交\n财务 报销"),
    (
        "zh",
        "猫最近不爱吃饭怎么办？",
        "猫咪食欲下降\n换季时猫咪食欲会下降，可以加热湿粮，超过三天不吃要去医院\n宠物 健康",
    ),
    (
        "zh",
        "前端项目用什么打包工具？",
        "前端构建工具\n前端项目统一使用 Vite 打包，旧项目逐步从 webpack 迁移\n前端 构建",
    ),
    # Traditional characters (Taiwan / Hong Kong users write them; e5 must
    # score them like Simplified text, so calibration sees them too).
    (
        "zh-hant",
        "颱風天航班取消了怎麼改簽？",
        "航班取消改簽\n颱風導致航班取消時可以在航空公司小程式免費改簽或全額退票\n出行 航班",
    ),
    (
        "zh-hant",
        "公司年會節目準備得怎麼樣了？",
        "年會節目安排\n市場部表演小品，技術部負責合唱，彩排定在下週三晚上\n公司 活動",
    ),
    (
        "zh-hant",
        "陽台種的草莓為什麼不結果？",
        "陽台草莓種植\n草莓開花後需要人工授粉，每天至少六小時日照才會結果\n園藝 陽台",
    ),
    (
        "zh-hant",
        "下個月的房貸還款日是哪天？",
        "房貸還款提醒\n房貸每月十五日自動扣款，扣款前一天要確認薪資帳戶餘額\n財務 房貸",
    ),
    (
        "zh-hant",
        "爺爺的降壓藥每天吃幾次？",
        "爺爺的用藥\n降壓藥每天早餐後吃一次，每週量三次血壓並記在本子上\n家庭 健康",
    ),
    (
        "zh-hant",
        "週末的羽毛球場訂好了嗎？",
        "羽毛球場預訂\n每週六下午三點在體育館二號場，提前三天在官網預訂\n運動 羽毛球",
    ),
    # Long passages: a memory's body chunks are paragraphs of hundreds of
    # characters (a chat log, meeting notes), not one-line summaries.
    (
        "long",
        "Did we ever figure out why the laptop fan is so loud?",
        "We opened the laptop on Saturday. The fan was clogged with dust and the thermal paste on the CPU had "
        "dried into a crust, so the fan spun at full speed even when the machine was idle. After blowing out the "
        "vents with compressed air and replacing the paste, idle temperature dropped from 78 to 52 degrees and the "
        "fan stays quiet unless a build is running. If it gets loud again, check the vents first; the paste should "
        "last a few years. The BIOS fan curve was left at its default.",
    ),
    (
        "long",
        "What did the landlord say about the broken heater?",
        "Called Mrs. Alvarez about the radiator in the bedroom that has been cold since the storm. She said the "
        "boiler service company is booked until Thursday, and that we may use an electric heater meanwhile and "
        "deduct the extra electricity from next month's rent if we keep the bills. She also asked us to bleed the "
        "radiators once the technician has been, and to report any water on the floor right away, because the "
        "flat below had a leak last winter.",
    ),
    (
        "long",
        "How did the kayaking trip go last summer?",
        "The three of us paddled the lake loop in two days. The first day was calm and we reached the island "
        "campsite by four. On the second morning the wind turned and the crossing back took twice as long; Jonas "
        "capsized once near the reeds but the dry bags kept everything dry. Lessons: start crossings early before "
        "the afternoon wind, bring a spare paddle, and pack the stove where it can be reached without unloading "
        "the boat. We want to do the river section next year.",
    ),
    (
        "long",
        "What were the conclusions of the pricing experiment?",
        "The four-week pricing test compared the current plan with a cheaper monthly tier and an annual discount. "
        "The cheaper tier raised sign-ups by 11 percent but cut revenue per user by 18 percent, so it lost money "
        "overall. The annual discount brought almost no new users but moved a fifth of existing monthly users to "
        "annual billing, which improved retention. Decision: keep the price, offer the annual discount on the "
        "upgrade page, and repeat the test in spring with a longer window.",
    ),
    (
        "long",
        "上次装修卫生间防水是怎么做的？",
        "卫生间装修时，先把地面和墙面清理干净，阴角和管道根部用堵漏王处理，然后刷了两遍柔性防水涂料，"
        "墙面刷到一米八高，淋浴区一直刷到顶。每遍之间隔了一天，第二遍和第一遍方向垂直。刷完做了四十八小时闭水"
        "试验，楼下邻居确认天花板没有渗水才开始贴砖。师傅提醒以后如果更换地漏，一定要重新补刷防水层。",
    ),
    (
        "long",
        "孩子学钢琴的进度怎么样？",
        "女儿学钢琴一年半了，现在在练车尔尼599的后半本和小奏鸣曲。老师说她的节奏感很好，但是左手力度不够，"
        "需要每天单独练十分钟左手音阶。每周六上午上课，每天在家练四十分钟，周末多练半小时。今年十二月准备考"
        "四级，考试曲目已经定了，老师建议十月开始每周加一节课，考前一个月每天录音回听找问题。",
    ),
    (
        "x",
        "How do we handle the disk full alert?",
        "磁盘空间告警处理\n先清理旧日志和过期快照，再检查是否有大文件被进程占用\n运维 磁盘",
    ),
    (
        "x",
        "用户喜欢怎样的代码评审方式？",
        "Code review style\nThe user wants short review comments, one issue per comment, with a suggested fix\npreferences review",
    ),
    (
        "x",
        "What is the reimbursement process?",
        "报销流程\n报销需要发票原件、审批单和付款截图，每月二十号前提交\n财务 报销",
    ),
    (
        "x",
        "狗在吃什么药？",
        "Dog's medication\nBiscuit takes half a tablet of carprofen with breakfast for joint pain\npets health",
    ),
]

#: Messages no memory of any vault should answer: nonsense and small talk.
NONSENSE: list[str] = [
    "asdf qwer zxcv",
    "lorem ipsum dolor sit amet",
    "ok thanks",
    "hmm",
    "。。。",
    "xyzzy plugh frobnicate",
    "哈哈哈哈",
    "42",
]
